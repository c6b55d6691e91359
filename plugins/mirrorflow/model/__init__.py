"""The configuration model: MM2's properties file read unchanged, client settings, and what a flow selects."""
