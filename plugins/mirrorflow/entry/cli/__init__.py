"""`mirrorflow` command line, one module per command group (setup, flows, metadata, runbooks, batch), `common` what
they share and `main` the whole parser. Importing the package loads none of them (the Spark jobs load their own).
"""
