"""Tools for op authors: check_op exercises an op as its schema allows and reports what is wrong."""
from opforge.testing.check import check_op
from opforge.testing.compare import TOLERANCES
from opforge.testing.report import CheckReport, OpCheckError

__all__ = ["CheckReport", "OpCheckError", "TOLERANCES", "check_op"]
