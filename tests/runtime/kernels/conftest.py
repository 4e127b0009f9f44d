"""The built-in kernel library, built once per test run."""
import os

import pytest

from opforge.runtime.providers.cpu import library as native


@pytest.fixture(scope="session")
def kernels():
    """All built-in CPU kernels; OPFORGE_TEST_KERNEL_FILES=a.cpp,b.cpp builds only those."""
    only = os.environ.get("OPFORGE_TEST_KERNEL_FILES")
    return native.cpu_kernels(only.split(",") if only else None)
