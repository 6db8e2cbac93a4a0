"""Token-id requests through an LMDeploy pipeline (its public ``infer`` takes text or chat messages only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["generate_ids"]


def generate_ids(pipe: Any, prompts: Sequence[Sequence[int]], gen_configs: Sequence[Any]) -> list[list[int]]:
    """The generated token ids of each prompt (token ids, no chat template), all submitted at once so that the
    engine batches them; ``gen_configs``: one LMDeploy ``GenerationConfig`` per prompt. Raises ``RuntimeError``
    with LMDeploy's message when a request fails. Uses the pipeline's request runner (``Pipeline._infer``, the
    one ``Pipeline.infer`` drives), fed token ids instead of messages."""
    if len(gen_configs) != len(prompts):
        raise ValueError(f"generate_ids: {len(prompts)} prompts but {len(gen_configs)} generation configs")
    sessions = [pipe.session_mgr.get() for _ in prompts]
    requests = (dict(session_id=s, messages=None, input_ids=list(ids), gen_config=g, stream_response=False)
                for s, ids, g in zip(sessions, prompts, gen_configs, strict=True))
    out = []
    for responses in pipe._infer(requests, multiplex=False):
        tokens: list[int] = []
        for r in responses:
            if r.finish_reason == "error":
                raise RuntimeError(f"LMDeploy request failed: {r.error_message}")
            tokens += list(r.token_ids)
        out.append(tokens)
    return out
