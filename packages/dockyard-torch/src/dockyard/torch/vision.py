"""A vision-language policy's image inputs (Qwen2-VL / Qwen2.5-VL): each micro-batch's images
become the model's ``pixel_values`` / ``image_grid_thw`` through the model's own image
processor, the one vLLM ran when it generated, so trainer and engine read the same pixels.

A trajectory keeps its images (:attr:`dockyard.core.experience.Trajectory.images`, one per
placeholder run in its tokens, every turn's screenshot); its tokens are the expanded prompt
the engine returned, so the image tokens line up with the processor's patches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def is_vision_language(config: Any) -> bool:
    """Whether a transformers config is a vision-language model's (it has a vision tower)."""
    return getattr(config, "vision_config", None) is not None


class ImageInputs:
    """The model keyword arguments of a micro-batch's images."""

    def __init__(self, model_name: str, config: Any) -> None:
        # lazy: transformers takes ~2 s to import; importing the worker stays light
        from transformers import AutoImageProcessor

        self.processor = AutoImageProcessor.from_pretrained(model_name)
        self.image_token_id = int(config.image_token_id)

    def token_counts(self, images: Sequence[np.ndarray]) -> list[int]:
        """How many image tokens each image becomes (its patch grid over the merge window): the
        count the engine expands its placeholder to."""
        if not images:
            return []
        grid = self.processor(images=[np.array(im) for im in images])["image_grid_thw"]
        merge = int(getattr(self.processor, "merge_size", 2))
        return [int(np.prod(g)) // merge**2 for g in np.asarray(grid)]

    def kwargs(
        self, input_ids: torch.Tensor, images: Sequence[np.ndarray], device: torch.device
    ) -> dict[str, torch.Tensor]:
        """``pixel_values``, ``image_grid_thw`` and ``mm_token_type_ids`` (M-RoPE's image
        positions) for ``input_ids [b, T]`` whose rows hold ``images`` in order; {} without
        images."""
        if not images:
            return {}
        # copies: an array that came through Ray is read-only (torch warns on those)
        feats = self.processor(images=[np.array(im) for im in images], return_tensors="pt")
        return {
            "pixel_values": feats["pixel_values"].to(device),
            "image_grid_thw": feats["image_grid_thw"].to(device),
            "mm_token_type_ids": (input_ids == self.image_token_id).long(),
        }
