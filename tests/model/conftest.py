"""Engine tests use tiny tensors: one intra-op thread is faster than two and avoids
oversubscription when several processes share the machine's cores."""
import torch

torch.set_num_threads(1)
