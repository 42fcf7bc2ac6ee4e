"""The quality layer's LLM judge: pinned, bounded, calibrated and hardened (issue #43)."""
