"""Command lines and YAML files that specguard and vLLM's own parser must read the same way.

Every reading case of issue #13 is here (items 6-12), the command lines of its wrong verdicts (items 1-5), and
the ordinary spellings operators use. `{dir}` in an argument is the folder the case's YAML files are written to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SPEC_DFLASH = '{"method": "dflash", "model": "z-lab/draft", "num_speculative_tokens": 15}'
SPEC_DSPARK = '{"method": "dspark", "num_speculative_tokens": 7}'
NIXL = '{"kv_connector": "NixlConnector", "kv_role": "kv_both"}'


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    # specguard's positional FILE (`specguard config FILE -- argv`); vLLM reads it as `--config FILE` at the end.
    file: str | None = None

    def vllm_argv(self, folder: str) -> list[str]:
        argv = [a.replace("{dir}", folder) for a in self.argv]
        if self.file is not None:
            argv += ["--config", self.file.replace("{dir}", folder)]
        return argv


def _c(id: str, *argv: str, files: dict[str, str] | None = None, file: str | None = None) -> Case:
    return Case(id, tuple(argv), files or {}, file)


CORPUS: list[Case] = [
    # -- the wrong verdicts' command lines (items 1-5) ------------------------------------------------------
    _c(
        "v1-fimla-dcp-interleave16",
        "m",
        "-tp",
        "8",
        "-dcp",
        "8",
        "--attention-backend",
        "FLASHINFER_MLA",
        "--dcp-kv-cache-interleave-size",
        "16",
    ),
    _c(
        "v1-block16-dcp-interleave64",
        "m",
        "-tp",
        "8",
        "-dcp",
        "2",
        "--block-size",
        "16",
        "--dcp-kv-cache-interleave-size",
        "64",
    ),
    _c(
        "v1-block16-dcp-interleave64-nixl",
        "m",
        "-tp",
        "8",
        "-dcp",
        "2",
        "--block-size",
        "16",
        "--dcp-kv-cache-interleave-size",
        "64",
        "--kv-transfer-config",
        NIXL,
    ),
    _c("v2-dspark-triton-mla", "m", "-tp", "2", "-dcp", "2", "--attention-backend", "TRITON_MLA", "-sc", SPEC_DSPARK),
    _c("v2-dspark-flashmla", "m", "-tp", "2", "-dcp", "2", "--attention-backend", "FLASHMLA", "-sc", SPEC_DSPARK),
    _c("v2-dspark-cutlass-mla", "m", "-tp", "2", "-dcp", "2", "--attention-backend", "CUTLASS_MLA", "-sc", SPEC_DSPARK),
    _c(
        "v2-dspark-fa-mla-interleave16",
        "m",
        "-tp",
        "2",
        "-dcp",
        "2",
        "--attention-backend",
        "FLASH_ATTN_MLA",
        "--cp-kv-cache-interleave-size",
        "16",
        "-sc",
        SPEC_DSPARK,
    ),
    _c(
        "v2-dspark-draft-backend",
        "m",
        "-tp",
        "2",
        "-dcp",
        "2",
        "--attention-backend",
        "FLASHINFER_MLA",
        "-sc",
        '{"method": "dspark", "num_speculative_tokens": 7, "attention_backend": "triton_mla"}',
    ),
    _c("v3-pcp2-dp2", "m", "-pcp", "2", "-dp", "2"),
    _c(
        "v4-ngram-draft-tp",
        "m",
        "-tp",
        "4",
        "-sc",
        '{"method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}',
    ),
    _c("v5-tp2-pcp2-dcp3", "m", "-tp", "2", "-pcp", "2", "-dcp", "3"),
    # -- item 6: dotted keys replace, they do not merge ------------------------------------------------------
    _c(
        "6-json-then-dotted",
        "m",
        "--speculative-config",
        SPEC_DFLASH,
        "--speculative-config.num_speculative_tokens",
        "8",
        "-dp",
        "2",
    ),
    _c(
        "6-dotted-then-json",
        "m",
        "--speculative-config.num_speculative_tokens",
        "8",
        "--speculative-config",
        SPEC_DFLASH,
    ),
    _c("6-short-dotted-and-long-dotted", "m", "-sc.method", "dflash", "--speculative-config.model", "z-lab/draft"),
    _c("6-long-dotted-and-short-dotted", "m", "--speculative-config.model", "z-lab/draft", "-sc.method", "dflash"),
    _c(
        "6-config-then-dotted",
        "--config",
        "{dir}/spec.yaml",
        "--speculative-config.num_speculative_tokens",
        "4",
        files={
            "spec.yaml": "model: m\nspeculative-config:\n  method: dflash\n  model: z-lab/draft\n"
            "data-parallel-size: 2\n"
        },
    ),
    _c(
        "6-dotted-all-keys",
        "m",
        "--speculative-config.method=eagle3",
        "--speculative-config.model=e/x",
        "--speculative-config.num_speculative_tokens=5",
    ),
    _c("6-dotted-underscored-head", "m", "--speculative_config.method", "eagle", "--speculative_config.model", "e"),
    _c("6-dotted-equals-value-with-dot", "m", "--speculative-config.model=org/model.v2"),
    _c("6-dotted-list-plus", "m", "-sc.method", "dflash", "--speculative-config.target_layer_ids+", "1,2,3"),
    _c("6-dotted-compilation", "m", "-cc.cudagraph_mode", "FULL_AND_PIECEWISE"),
    _c("6-dotted-compilation-equals", "m", "-cc.cudagraph_mode=full_decode_only", "-cc.mode", "3"),
    # -- item 7: dotted keys inside a YAML config ----------------------------------------------------------------
    _c(
        "7-yaml-dotted",
        "--config",
        "{dir}/dotted.yaml",
        files={
            "dotted.yaml": "model: m\nspeculative-config.method: dflash\n"
            "speculative-config.num_speculative_tokens: 4\ndata-parallel-size: 2\n"
        },
    ),
    _c(
        "7-yaml-dotted-file",
        file="{dir}/dotted2.yaml",
        files={
            "dotted2.yaml": "model: m\nspeculative_config.method: dspark\ndecode-context-parallel-size: 2\n"
            "tensor-parallel-size: 2\n"
        },
    ),
    # -- item 8: abbreviations ---------------------------------------------------------------------------------
    _c("8-abbrev", "m", "--tensor-parallel", "4", "--decode-context", "3"),
    _c("8-abbrev-data-parallel-ambiguous", "m", "--data-parallel", "2"),
    _c("8-abbrev-block", "m", "--block", "32"),
    _c("8-abbrev-speculative", "m", "--speculative", SPEC_DFLASH),
    _c("8-abbrev-enforce", "m", "--enforce"),
    _c("8-abbrev-spec-ambiguous", "m", "--spec", "x"),
    # -- item 9: --attention-config.backend ----------------------------------------------------------------------
    _c("9-attention-config-backend", "m", "-tp", "2", "-dcp", "2", "--attention-config.backend", "FLASHINFER_MLA"),
    _c("9-attention-config-backend-lower", "m", "--attention-config.backend", "triton_mla"),
    _c("9-attention-config-json", "m", "--attention-config", '{"backend": "FLASHMLA"}'),
    _c("9-attention-config-auto", "m", "-ac", '{"backend": "auto"}'),
    _c("9-attention-config-bad-backend", "m", "--attention-config.backend", "NOT_A_BACKEND"),
    _c("9-attention-both", "m", "--attention-backend", "FLASHMLA", "--attention-config.backend", "TRITON_MLA"),
    _c("9-attention-backend-bad", "m", "--attention-backend", "NOT_A_BACKEND"),
    _c("9-attention-backend-auto", "m", "--attention-backend", "auto"),
    _c("9-attention-backend-lower", "m", "--attention-backend", "flashinfer_mla"),
    # -- item 10: enum and boolean values ----------------------------------------------------------------------
    _c("10-cudagraph-auto", "m", "-cc", '{"cudagraph_mode": "auto"}'),
    _c("10-cudagraph-space", "m", "-cc", '{"cudagraph_mode": " FULL"}'),
    _c("10-cudagraph-int", "m", "-cc", '{"cudagraph_mode": 2}'),
    _c("10-cudagraph-lower", "m", "-cc", '{"cudagraph_mode": "piecewise"}'),
    _c("10-cudagraph-bad-name", "m", "-cc", '{"cudagraph_mode": "FULL_DECODE"}'),
    _c("10-compilation-dashed-key", "m", "-cc", '{"cudagraph-mode": "FULL"}'),
    _c("10-compilation-unknown-key", "m", "--compilation-config", '{"cudagraph_mod": "FULL"}'),
    _c("10-compilation-not-json", "m", "-cc", "{cudagraph_mode: FULL}"),
    _c(
        "10-yaml-enforce-eager-string",
        "m",
        "--config",
        "{dir}/eager.yaml",
        files={"eager.yaml": 'enforce-eager: "true"\n'},
    ),
    # Without a positional model, the stray "true" becomes the model: vLLM would try to load a model "true".
    _c(
        "10-yaml-enforce-eager-string-model",
        "--config",
        "{dir}/eager1.yaml",
        files={"eager1.yaml": 'model: m\nenforce-eager: "true"\n'},
    ),
    _c(
        "10-yaml-enforce-eager-true",
        "--config",
        "{dir}/eager2.yaml",
        files={"eager2.yaml": "model: m\nenforce-eager: true\n"},
    ),
    _c(
        "10-yaml-enforce-eager-false",
        "m",
        "--enforce-eager",
        "--config",
        "{dir}/eager3.yaml",
        files={"eager3.yaml": "enforce-eager: false\n"},
    ),
    _c(
        "10-yaml-underscored-false-dropped",
        "m",
        "--enforce-eager",
        "--config",
        "{dir}/eager4.yaml",
        files={"eager4.yaml": "enforce_eager: false\n"},
    ),
    _c("10-no-enforce-eager", "m", "--enforce-eager", "--no-enforce-eager"),
    _c("10-enforce-eager-with-value", "m", "--enforce-eager=true"),
    # -- item 11: options taking several values ------------------------------------------------------------------
    _c("11-served-model-names", "m", "--served-model-name", "a", "b", "-dp", "2"),
    _c("11-served-model-name-no-model", "--served-model-name", "a", "-dp", "2"),
    _c("11-two-positionals", "m", "n"),
    _c(
        "11-yaml-list",
        "--config",
        "{dir}/names.yaml",
        files={"names.yaml": "model: m\nserved-model-name: [a, b]\ntensor-parallel-size: 2\n"},
    ),
    # -- item 12: the same option twice in a YAML file -----------------------------------------------------------
    _c(
        "12-yaml-twice",
        "--config",
        "{dir}/twice.yaml",
        files={"twice.yaml": "model: m\ndata-parallel-size: 2\ndata_parallel_size: 1\n"},
    ),
    _c(
        "12-yaml-twice-file",
        file="{dir}/twice2.yaml",
        files={"twice2.yaml": "model: m\ndata_parallel_size: 1\ndata-parallel-size: 2\n"},
    ),
    _c("12-cli-twice", "m", "-dp", "2", "--data-parallel-size", "4"),
    # -- --config precedence and YAML shapes ------------------------------------------------------------------------
    _c(
        "config-overridden-by-cli",
        "m",
        "-tp",
        "4",
        "--config",
        "{dir}/base.yaml",
        files={"base.yaml": "tensor-parallel-size: 2\ndata-parallel-size: 2\n"},
    ),
    _c(
        "config-file-then-args",
        "-tp",
        "4",
        file="{dir}/base2.yaml",
        files={"base2.yaml": "model: m\ntensor-parallel-size: 2\n"},
    ),
    _c(
        "config-nested-mapping",
        file="{dir}/nested.yaml",
        files={
            "nested.yaml": "model: m\nspeculative-config:\n  method: dflash\n  model: z-lab/draft\n"
            "  num-speculative-tokens: 15\ncompilation-config:\n  cudagraph_mode: piecewise\n"
        },
    ),
    _c(
        "config-json-string",
        file="{dir}/jsonstr.yaml",
        files={"jsonstr.yaml": 'model: m\nspeculative-config: \'{"method": "eagle3", "model": "e"}\'\n'},
    ),
    _c("config-no-model", "--config", "{dir}/nomodel.yaml", files={"nomodel.yaml": "tensor-parallel-size: 2\n"}),
    _c("config-not-yaml-extension", "m", "--config", "{dir}/serve.json", files={"serve.json": "{}\n"}),
    _c("config-twice", "m", "--config", "{dir}/a.yaml", "--config", "{dir}/a.yaml", files={"a.yaml": "model: m\n"}),
    _c("config-missing-file-arg", "m", "--config"),
    _c("config-float-for-int", file="{dir}/float.yaml", files={"float.yaml": "model: m\ndata-parallel-size: 2.5\n"}),
    _c("config-quoted-int", file="{dir}/quoted.yaml", files={"quoted.yaml": "model: m\ndata-parallel-size: '2'\n"}),
    _c("config-list-file", file="{dir}/list.yaml", files={"list.yaml": "- model\n- m\n"}),
    # -- ordinary spellings ------------------------------------------------------------------------------------------
    _c("plain", "m", "-tp", "2"),
    _c("model-option", "--model", "m", "-tp", "2"),
    _c("model-option-equals", "-tp", "2", "--model=m"),
    _c("underscored", "m", "--tensor_parallel_size", "2", "--data_parallel_size=2"),
    _c("equals", "m", "--tensor-parallel-size=2", "-dp=2"),
    _c("positional-after-options", "-tp", "2", "m"),
    _c("frontend-options", "m", "--port", "8000", "--host", "0.0.0.0", "-tp", "2", "--api-server-count", "2"),
    _c("human-readable-max-len", "m", "--max-model-len", "32k", "-dp", "2"),
    _c("optimization-level", "m", "-O3", "-tp", "2"),
    _c("kv-transfer-nixl", "m", "--kv-transfer-config", NIXL),
    _c("kv-transfer-dashed-key", "m", "--kv-transfer-config", '{"kv-connector": "NixlConnector"}'),
    _c("spec-flags", "m", "--spec-method", "dflash", "--spec-model", "z-lab/draft", "--spec-tokens", "4"),
    _c("spec-flags-and-json", "m", "--spec-method", "dflash", "-sc", '{"method": "eagle3", "model": "e"}'),
    _c("spec-json-dashed-keys", "m", "-sc", '{"method": "dflash", "num-speculative-tokens": 4}'),
    _c("spec-not-json", "m", "-sc", "{method: dflash}"),
    _c(
        "full-dspark-dcp",
        "moonshotai/Kimi-K3",
        "-tp",
        "8",
        "-dcp",
        "8",
        "--cp-kv-cache-interleave-size",
        "16",
        "--attention-backend",
        "FLASHINFER_MLA",
        "--speculative-config",
        '{"method": "dspark", "model": "moonshotai/Kimi-K3-DSpark", "num_speculative_tokens": 7}',
        "--compilation-config",
        '{"cudagraph_mode": "FULL_AND_PIECEWISE"}',
    ),
    _c("bad-int", "m", "--data-parallel-size", "two"),
    _c("bad-int-short", "m", "-tp", "2.0"),
    _c("missing-value", "m", "-tp"),
    _c("unknown-option", "m", "--data-paralel-size", "2"),
    _c("unknown-switch", "m", "--not-an-option"),
    _c(
        "dynamic-sd",
        "m",
        "-dp",
        "2",
        "-sc",
        '{"method": "eagle3", "model": "e", "num_speculative_tokens_per_batch_size": [[1, 64, 4]]}',
    ),
    _c("eager-and-graphs", "m", "--enforce-eager", "-cc", '{"cudagraph_mode": "FULL_AND_PIECEWISE"}'),
    # -- JSON-valued options with bad values (issue #19 item 3): vLLM validates config dataclasses while parsing ----
    _c("19-kv-no-role", "m", "--kv-transfer-config", '{"kv_connector": "NixlConnector"}'),
    _c("19-kv-bad-role", "m", "--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_everything"}'),
    _c("19-kv-bad-port", "m", "--kv-transfer-config", '{"kv_connector": "X", "kv_role": "kv_both", "kv_port": "x"}'),
    _c(
        "19-kv-port-as-text", "m", "--kv-transfer-config", '{"kv_connector": "X", "kv_role": "kv_both", "kv_port": "1"}'
    ),
    _c("19-kv-port-float", "m", "--kv-transfer-config", '{"kv_role": "kv_both", "kv_port": 14579.5}'),
    _c("19-kv-role-only", "m", "--kv-transfer-config", '{"kv_role": "kv_producer"}'),
    _c("19-kv-dotted-no-role", "m", "--kv-transfer-config.kv_connector", "NixlConnector"),
    _c(
        "19-kv-dotted-with-role",
        "m",
        "--kv-transfer-config.kv_connector",
        "NixlConnector",
        "--kv-transfer-config.kv_role=kv_consumer",
    ),
    _c(
        "19-yaml-kv-no-role",
        files={"kv.yaml": "model: m\nkv-transfer-config:\n  kv_connector: NixlConnector\n"},
        file="{dir}/kv.yaml",
    ),
    _c(
        "19-yaml-dotted-kv-bad-role",
        files={"kvd.yaml": "model: m\nkv-transfer-config.kv_connector: X\nkv-transfer-config.kv_role: kv_all\n"},
        file="{dir}/kvd.yaml",
    ),
    _c("19-cc-capture-sizes-text", "m", "-cc", '{"cudagraph_capture_sizes": "big"}'),
    _c("19-cc-capture-sizes-bad-item", "m", "-cc", '{"cudagraph_capture_sizes": [1, 2, "x"]}'),
    _c("19-cc-capture-sizes", "m", "-cc", '{"cudagraph_capture_sizes": [1, 2, 4]}'),
    _c("19-cc-dotted-capture-sizes", "m", "-cc.cudagraph_capture_sizes+", "1,2,x"),
    _c("19-cc-partition-maybe", "m", "-cc", '{"use_inductor_graph_partition": "maybe"}'),
    _c("19-cc-partition-yes", "m", "-cc", '{"use_inductor_graph_partition": "true"}'),
    _c("19-cc-mode-9", "m", "-cc", '{"mode": 9}'),
    _c("19-cc-mode-3", "m", "-cc", '{"mode": 3}'),
    _c("19-cc-max-size-fraction", "m", "-cc", '{"max_cudagraph_capture_size": 2.5}'),
    _c("19-cc-max-size-whole", "m", "-cc", '{"max_cudagraph_capture_size": 16.0}'),
    _c("19-cc-compile-sizes-mixed", "m", "-cc", '{"compile_sizes": [1, "cudagraph_capture_sizes"]}'),
    _c("19-cc-compile-sizes-bad", "m", "-cc", '{"compile_sizes": [1, [2]]}'),
    _c(
        "19-yaml-cc-bad-sizes",
        files={"cc.yaml": "model: m\ncompilation-config:\n  cudagraph_capture_sizes: [1, two]\n"},
        file="{dir}/cc.yaml",
    ),
]
