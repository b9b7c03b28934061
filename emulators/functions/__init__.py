"""A local Azure Functions host for Python v2-model apps: `python -m emulators.functions`.

It indexes `function_app.py` the way the Python worker does and serves its HTTP, timer and Service Bus
triggers. It is a development tool and never ships with the app (see `.funcignore`).
"""
