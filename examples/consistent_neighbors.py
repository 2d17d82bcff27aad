"""The seeds' custom distributed optimizer (004_*, "For Customizing: Distributed Optimization"), as a user writes
it: each rank's gradient averaged with its two ring neighbours', applied to its own model. Run it with
``mpiexec -n 4 python examples/consistent_neighbors.py`` (d5 ships the same class as
``d5.distributed.ConsistentNeighbors``)."""
import numpy as np

import d5
from d5.distributed import DistributedOptimizer, MPICommunicationNetwork


class ConsistentNeighbors(DistributedOptimizer):
    # Follows communication scheme from https://arxiv.org/pdf/1705.09056.pdf

    def step(self, inputs):
        self.base_optimizer.new_input()
        for param in self.network.get_params():
            self.base_optimizer.prepare_param(param)
        output = self.executor.inference_and_backprop(inputs, self.base_optimizer.loss)
        gradients = self.network.gradient(self.base_optimizer.loss)
        for param_name, grad_name in gradients:
            param, grad = self.network.fetch_tensors([param_name, grad_name])
            grad = self.communication.reduce_from_neighbors(grad) / 3
            param = self.base_optimizer.update_rule(grad, param, param_name)
            self.network.feed_tensor(param_name, param)
        return output


if __name__ == "__main__":
    comm = MPICommunicationNetwork()
    train, _ = d5.datasets.load("digits")
    executor = d5.frameworks.reference.from_model(d5.models.mlp((1, 8, 8), hidden=(32,), seed=0))
    optimizer = ConsistentNeighbors(d5.MomentumOptimizer(executor, lr=0.05, momentum=0.9), comm)
    sampler = d5.distributed.DistributedSampler(train, batch_size=32, rank=comm.rank, size=comm.size, seed=0)
    for epoch in range(3):
        losses = [float(optimizer.step(batch)["loss"]) for batch in sampler]
        if comm.rank == 0:
            print(f"epoch {epoch}: mean loss {np.mean(losses):.3f} on rank 0 of {comm.size}")
