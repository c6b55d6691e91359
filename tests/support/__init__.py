"""Helpers the tests, the drill and the benchmarks share: clusters, streams, deployments."""
