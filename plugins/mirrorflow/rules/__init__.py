"""Replication rules and records: pure functions and wire formats, no I/O.

Policy, filters, wire, provenance, digests, anchors, offset syncs, translation."""
