"""TpModelWorker subclass with the fork's pre-planned generation entries."""

from sglang.srt.managers.schedule_batch import ScheduleBatch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class ForkTpModelWorker(TpModelWorker):
    def _new_forward_batch(self, batch: ScheduleBatch) -> ForwardBatch:
        return ForwardBatch.init_new(
            batch,
            self.model_runner,
            return_hidden_states_before_norm=False,
        )

    # idiom: sglang/srt/managers/tp_worker.py TpModelWorker.forward_batch_generation (forward_batch passed in pre-planned)
    # expect: SG106
    def forward_extend_preplanned(self, batch: ScheduleBatch) -> GenerationBatchResult:
        forward_batch = self._new_forward_batch(batch)
        mode = forward_batch.forward_mode
        if mode.is_extend() and not mode.is_target_verify():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        return self.forward_batch_generation(None, forward_batch=forward_batch)

    # idiom: sglang/srt/managers/tp_worker.py TpModelWorker.forward_batch_generation; model_runner._prepare_eager_forward_batch (pads only with global_num_tokens_cpu)
    # expect: clean
    def forward_extend_preplanned_rank_local(
        self, batch: ScheduleBatch
    ) -> GenerationBatchResult:
        forward_batch = self._new_forward_batch(batch)
        mode = forward_batch.forward_mode
        if (
            mode.is_extend()
            and not mode.is_target_verify()
            and forward_batch.global_num_tokens_cpu is None
        ):
            # Not MLP-synced: no DP padding follows. Attn-TP input
            # scattering may still round the token count up, so let the
            # runner re-plan (same backend) if the shapes move.
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
            forward_batch.mark_forward_metadata_ready(replan_equivalent=True)
        return self.forward_batch_generation(None, forward_batch=forward_batch)

    # idiom: sglang-0.5.6/sglang/srt/speculative/eagle_worker_v2.py forward_batch_generation(..., skip_attn_backend_init=True)
    # expect: SG106
    def forward_draft_decode_legacy(
        self, forward_batch: ForwardBatch
    ) -> GenerationBatchResult:
        if forward_batch.forward_mode.is_decode():
            self.model_runner.attn_backend.init_forward_metadata(forward_batch)
        return self.forward_batch_generation(
            None, forward_batch=forward_batch, skip_attn_backend_init=True
        )

    # idiom: sglang/srt/speculative/eagle_utils.py eagle_prepare_for_verify (load_batch + mark only on the CUDA-graph path)
    # expect: clean
    def forward_decode_graph_preloaded(
        self, batch: ScheduleBatch
    ) -> GenerationBatchResult:
        forward_batch = self._new_forward_batch(batch)
        graph_runner = self.model_runner.decode_cuda_graph_runner
        can_run_graph = bool(
            forward_batch.forward_mode.is_decode()
            and graph_runner
            and graph_runner.can_run_graph(forward_batch)
        )
        if can_run_graph:
            graph_runner.load_batch(forward_batch)
            forward_batch.mark_forward_metadata_ready()
        # Eager (non-graph) decode stays unmarked and is planned post-pad.
        return self.forward_batch_generation(None, forward_batch=forward_batch)
