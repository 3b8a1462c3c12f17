"""Worker preload for the tests: the worker's process exits at once, every time."""

import os

os._exit(3)
