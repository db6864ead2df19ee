"""The one part pyproject.toml cannot say: the optional C modules (the head reader of Chakra
messages, converters/_proto/_head.c; the scheduler's event loop, converters/scheduler/_loop.c;
the numbers of `stats` over a measured set's columns, converters/_stats.c; the `.pftrace`
writer's loops over every event, converters/writers/_pftrace.c). Without a C
compiler the install goes on without them and Python does the same work (same results, slower)."""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("converters._proto._head", ["converters/_proto/_head.c"], optional=True),
    Extension("converters.scheduler._loop", ["converters/scheduler/_loop.c"], depends=["converters/_spans.h"],
              optional=True),
    Extension("converters._stats", ["converters/_stats.c"], depends=["converters/_spans.h"], optional=True),
    Extension("converters.writers._pftrace", ["converters/writers/_pftrace.c"], optional=True),
])
