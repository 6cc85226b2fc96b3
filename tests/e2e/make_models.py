"""Make the e2e tier's models in a folder: a tiny random-weight Llama target, a 1-layer draft and an EAGLE head,
all sharing one BPE tokenizer trained here (there is no model hub on this machine).

Run under the e2e venv's python (its transformers is the one vLLM will load them with):
    python tests/e2e/make_models.py OUT_DIR
writes OUT_DIR/{target,draft,eagle}/. Deterministic: the same seed gives the same weights and tokenizer.

The draft reuses the target's embeddings, first layer, final norm and LM head, so it agrees with the target
often enough that speculated tokens are accepted as well as rejected (both paths of the draft step run).
The CPU attention backend needs a head size of at least 32: 2 heads of 32 make the 64-wide hidden state.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SEED = 1234
# the tokenizer's training text is random sentences of these words
TEXT = (
    "the a one two three speculative draft target token tokens model models serve serving request requests "
    "metadata attention query key value cache block blocks layer layers batch batches step steps decode prefill "
    "guard check checks runtime static rule rules padded padding count counts start loc length lengths kernel "
    "launch builder builds every each process engine worker server client test tests tiny random weights "
    "and or of to in on for with from by is are was were be not no yes fast slow small large first last next"
)
WORDS = TEXT.split()
SPECIAL = ["<unk>", "<s>", "</s>"]
VOCAB_SIZE = 512


def corpus(rng: random.Random, lines: int = 4000) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24))) + "." for _ in range(lines)]


def make_tokenizer(rng: random.Random) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(rng), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def llama_config(tok: PreTrainedTokenizerFast, layers: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=None,
        tie_word_embeddings=False,
        torch_dtype="float32",
        architectures=["LlamaForCausalLM"],
    )


def save_model(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, out: Path) -> None:
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def make_all(out: Path) -> None:
    rng = random.Random(SEED)
    torch.manual_seed(SEED)
    tok = make_tokenizer(rng)

    target = LlamaForCausalLM(llama_config(tok, layers=2)).eval()
    save_model(target, tok, out / "target")

    # The draft: the target cut to its first layer.
    draft = LlamaForCausalLM(llama_config(tok, layers=1)).eval()
    missing, unexpected = draft.load_state_dict(target.state_dict(), strict=False)
    assert not missing, missing
    assert all(".layers.1." in key for key in unexpected), unexpected
    save_model(draft, tok, out / "draft")

    # The EAGLE head (EAGLE-1 layout as vLLM's EagleLlamaForCausalLM loads it): fc over [embedding, target
    # hidden state], one decoder layer without its input norm; embeddings and LM head come from the target.
    head = llama_config(tok, layers=1)
    (out / "eagle").mkdir(parents=True, exist_ok=True)
    head.save_pretrained(out / "eagle")
    tok.save_pretrained(out / "eagle")
    layer0 = {
        key.removeprefix("model."): value.clone()
        for key, value in target.state_dict().items()
        if key.startswith("model.layers.0.") and "input_layernorm" not in key
    }
    fc = torch.cat([torch.eye(64), torch.eye(64)], dim=1) * 0.5  # the mean of the two inputs
    save_file({"fc.weight": fc.contiguous(), **layer0}, str(out / "eagle" / "model.safetensors"))


if __name__ == "__main__":
    make_all(Path(sys.argv[1]))
    print("ok")
