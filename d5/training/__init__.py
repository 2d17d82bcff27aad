"""L2 — training: datasets, samplers, optimizers, the trainer, events and metrics (framework-neutral)."""
