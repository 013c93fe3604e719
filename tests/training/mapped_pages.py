"""Which mapping of this process holds a tensor's data: a scratch table's file or anonymous
memory (tests of what a rank keeps out of its anonymous memory)."""

import torch


def mapped_file(tensor: torch.Tensor) -> str:
    """The path of the file whose mapping holds ``tensor``'s first byte ("" for anonymous
    memory; an unlinked file ends in " (deleted)")."""
    ptr = tensor.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            lo, hi = (int(a, 16) for a in fields[0].split("-"))
            if lo <= ptr < hi:
                return fields[5].strip() if len(fields) > 5 else ""
    return ""
