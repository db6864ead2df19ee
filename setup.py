"""The one part pyproject.toml cannot say: the optional C head reader of Chakra messages
(converters/_proto/_head.c). Without a C compiler the install goes on without it and
converters/_proto/wire.py reads heads in Python (same results, slower)."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("converters._proto._head", ["converters/_proto/_head.c"], optional=True),
    Extension("converters.scheduler._loop", ["converters/scheduler/_loop.c"], optional=True),
])
