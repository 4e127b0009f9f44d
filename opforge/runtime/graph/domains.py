"""Which operator domains the onnx package defines, as opposed to custom domains."""
from __future__ import annotations

STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training")
"""Domains whose operator sets come from the onnx package itself ("ai.onnx" is "" by name)."""


def is_standard_domain(domain: str) -> bool:
    """Whether ``domain``'s operators are defined by the onnx package (not a custom domain)."""
    return domain in STANDARD_DOMAINS
