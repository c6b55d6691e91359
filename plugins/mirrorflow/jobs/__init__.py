"""The jobs: the stream, backfill, audit, checkpoints, lifecycle, reset, runbooks and topology."""
