"""make test-cpus runs the numeric tiers with ATen's kernels held to another CPU's instruction set
(ATEN_CPU_CAPABILITY): the setting must reach torch, or those runs test this CPU's kernels again."""
import os

import pytest
import torch


@pytest.mark.skipif("ATEN_CPU_CAPABILITY" not in os.environ, reason="runs under make test-cpus")
def test_the_held_instruction_set_reaches_torch():
    assert torch.backends.cpu.get_cpu_capability() == os.environ["ATEN_CPU_CAPABILITY"].upper()
