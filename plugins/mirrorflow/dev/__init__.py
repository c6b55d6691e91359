"""Dev tools: local brokers, the embedded Airflow, network faults, sample traffic.

Production code never imports them (tests/test_layers.py)."""
