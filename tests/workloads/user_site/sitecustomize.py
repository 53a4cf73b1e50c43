"""A user's own sitecustomize: traintop's shim must still run it."""

import os

os.environ["USER_SITECUSTOMIZE_RAN"] = "yes"
