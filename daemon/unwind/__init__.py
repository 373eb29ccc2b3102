"""DWARF CFI unwinding of copied user stacks (PERF_SAMPLE_REGS_USER + STACK_USER).

The collector builds one `ObjectCFI` per object content, one `AddressSpace`
per process (`Mappings` is a ready one) and one `Unwinder` per architecture,
then calls `Unwinder.unwind(space, regs, stack)` for every sample.
"""

from .errors import CfiError, ElfError, UnwindError
from .objcfi import ObjectCFI
from .regs import AARCH64, X86_64, ArchRegs, arch_by_name
from .space import AddressSpace, Mappings
from .unwinder import UnwindResult, Unwinder

__all__ = [
    "AARCH64", "AddressSpace", "ArchRegs", "CfiError", "ElfError", "Mappings", "ObjectCFI",
    "UnwindError", "UnwindResult", "Unwinder", "X86_64", "arch_by_name",
]
