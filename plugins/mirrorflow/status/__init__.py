"""A flow's status: metrics with MM2's names, the Prometheus endpoint and the status files."""
