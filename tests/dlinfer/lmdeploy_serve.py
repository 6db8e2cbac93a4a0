"""Run by test_lmdeploy_engine.py in a fresh process, as a user would run it (``import ditorch`` mocks ``cuda``):

    python lmdeploy_serve.py MODEL_FOLDER eager|graph prefix|no-prefix NEW_TOKENS PROMPTS_JSON

Prints one JSON line: ``{"tokens": [...], "again": [...] (prefix only), "counts": {...}, "again_counts": ...}``.
"""

from __future__ import annotations

import json
import sys

from lmdeploy import GenerationConfig, PytorchEngineConfig, pipeline

import ditorch  # noqa: F401  (cuda -> the vendor's device, before LMDeploy builds its engine)
import dlinfer
from dlinfer.framework.lmdeploy_ext.requests import generate_ids


def serve(pipe, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy tokens of ``prompts`` (token ids) through the pipeline's engine, one batch."""
    gen = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, top_k=1, ignore_eos=True)
    return generate_ids(pipe, prompts, [gen] * len(prompts))


def _counts() -> dict[str, int]:
    return {f"{op}/{kernel}": n for (op, kernel), n in dlinfer.kernel_counts().items()}


def main() -> None:
    folder, mode, prefix, new_tokens, prompts = sys.argv[1:6]
    config = PytorchEngineConfig(device_type="maca", eager_mode=mode == "eager", block_size=16,
                                 cache_max_entry_count=0.02, max_batch_size=4, session_len=256,
                                 enable_prefix_caching=prefix == "prefix")
    pipe = pipeline(folder, backend_config=config)
    result = {}
    try:
        ids = json.loads(prompts)
        dlinfer.reset_counts()
        result["tokens"] = serve(pipe, ids, int(new_tokens))
        result["counts"] = _counts()
        if prefix == "prefix":  # the same prompts again: their full blocks come from the prefix cache
            dlinfer.reset_counts()
            result["again"] = serve(pipe, ids, int(new_tokens))
            result["again_counts"] = _counts()
    finally:
        pipe.close()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
