"""Entry points: the command line, the Airflow task functions, views and trigger, the deployment's names."""
