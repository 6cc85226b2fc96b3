"""Adversarial corpus, SG101: the metadata sink reached through aliases and functools.partial, and the calls that
are not the sink (capture builders, another object's method of the same name, the shared helper)."""

from __future__ import annotations

import functools
from functools import partial

from vllm.v1.worker.gpu import attn_utils
from vllm.v1.worker.gpu.attn_utils import build_attn_metadata
from vllm.v1.worker.gpu.spec_decode.speculator import DraftModelSpeculator


class AliasedSinkSpeculator(DraftModelSpeculator):
    def __init__(self, vllm_config, device) -> None:
        super().__init__(vllm_config, device)
        # idiom: vllm-project/vllm vllm/v1/worker/gpu/buffer_utils.py (`new_buffer = partial(UvaBufferPool, ...)`),
        #        the builder kept on the instance
        self._metadata_builder = build_attn_metadata
        self._capture_builder = partial(build_attn_metadata, for_cudagraph_capture=True)

    # idiom: a local alias of the sink
    # expect: SG101
    def prefill_metadata(self, num_reqs, num_tokens, query_start_loc_cpu):
        bam = build_attn_metadata
        return bam(
            attn_groups=self.attn_groups,
            num_reqs=num_reqs,
            num_tokens=num_tokens,
            query_start_loc_cpu=query_start_loc_cpu,
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/speculator.py (0.33.0) (`partial(...)` of a callable
    #        with the arguments every step shares)
    # expect: SG101
    def decode_metadata(self, num_reqs, num_tokens, steps):
        build = functools.partial(attn_utils.build_attn_metadata, attn_groups=self.attn_groups, num_reqs=num_reqs)
        return [build(num_tokens=num_tokens, step=step) for step in range(steps)]

    # idiom: the sink kept on the instance in __init__ and called through it
    # expect: SG101
    def verify_metadata(self, num_reqs, num_tokens):
        return self._metadata_builder(attn_groups=self.attn_groups, num_reqs=num_reqs, num_tokens=num_tokens)

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/spec_decode/dflash/cudagraph.py (`build_attn_metadata(...,
    #        for_cudagraph_capture=True)`), through the partial kept on the instance: a capture builder
    # expect: clean
    def capture_metadata(self, num_reqs, num_tokens):
        return self._capture_builder(attn_groups=self.attn_groups, num_reqs=num_reqs, num_tokens=num_tokens)

    # idiom: the capture flag passed through a local
    # expect: clean
    def capture_metadata_flag(self, num_reqs, num_tokens):
        capture = True
        return build_attn_metadata(
            attn_groups=self.attn_groups, num_reqs=num_reqs, num_tokens=num_tokens, for_cudagraph_capture=capture
        )

    # idiom: vllm-project/vllm vllm/v1/worker/gpu/model_states/default.py (`for_cudagraph_capture=for_capture`),
    #        with the flag off: a runtime build
    # expect: SG101
    def warmup_metadata(self, num_reqs, num_tokens):
        for_capture = False
        return build_attn_metadata(
            attn_groups=self.attn_groups, num_reqs=num_reqs, num_tokens=num_tokens, for_cudagraph_capture=for_capture
        )

    # idiom: a builder object's method that shares the sink's name (vllm's metadata builders' `build`)
    # expect: clean
    def builder_metadata(self, num_reqs, num_tokens):
        return self.metadata_builder.build_attn_metadata(num_reqs=num_reqs, num_tokens=num_tokens)

    # idiom: the shared helper bound to a local: not the sink
    # expect: clean
    def helper_metadata(self, num_reqs, num_tokens, seq_lens):
        build = self._build_draft_attn_metadata
        return build(
            num_reqs=num_reqs,
            num_reqs_padded=num_reqs,
            num_tokens_padded=num_tokens,
            seq_lens_cpu_upper_bound=seq_lens,
            step=1,
        )
