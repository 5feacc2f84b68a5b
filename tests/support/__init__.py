"""Machinery only tests and benchmarks use, kept out of the installed product.

Trino and Nessie (declared on `tableflow_core.dev.launcher` like the stack's servers),
the S3 fault proxy, the STS gateway that mints and checks temporary credentials in front
of s3proxy, its SigV4 code, and the HTTP relay the last two share.
"""
