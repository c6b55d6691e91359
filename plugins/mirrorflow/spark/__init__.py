"""Spark mechanics: the session and its jars, Spark's logs, the Python daemon and the executor-side writer."""
