"""DWARF CFI unwinding of copied user stacks (PERF_SAMPLE_REGS_USER + STACK_USER).

How the collector uses it::

    unwinder = Unwinder("x86_64")            # one per architecture
    attr.sample_regs_user = unwinder.regs_mask   # 0xff0fff on x86_64
    attr.sample_stack_user = 16384               # 8 KiB cuts deep stacks short

    cfi = ObjectCFI.from_fd(fd)               # one per object *content*, shared by all
    space = Mappings()                        # one per process (or your own AddressSpace)
    space.add(start, end, pgoff, cfi)         # executable mappings; cfi None for JIT/anon
    space.remove(start, end)                  # munmap / exec: also clears space.rule_cache

    result = unwinder.unwind(space, regs_user, stack_user[:dyn_size])
    result.frames    # (leaf ip, return address, ...) -- return addresses as found, not - 1
    result.complete  # reached _start / clone3 / a zero return address
    result.reason    # "root", "end-of-stack", "no-cfi", "bad-frame", "max-frames", "no-regs"

regs_user is the REGS_USER array as sampled (ascending bit order of the
mask), also for kernel-mode samples of user tasks: the user IP is taken from
it, never from the sample's IP; a sample with abi 0 passes `()` and gets
"no-regs". Nothing here raises on hostile input.
"""

from .unwinderrors import CfiError, ElfError, UnwindError
from .objcfi import ObjectCFI
from .regs import AARCH64, X86_64, ArchRegs, arch_by_name
from .procspace import AddressSpace, Mappings
from .unwinder import UnwindResult, Unwinder

__all__ = [
    "AARCH64", "AddressSpace", "ArchRegs", "CfiError", "ElfError", "Mappings", "ObjectCFI",
    "UnwindError", "UnwindResult", "Unwinder", "X86_64", "arch_by_name",
]
