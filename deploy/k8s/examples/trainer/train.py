"""Trains a small model on the dataset "train" read through dscache.Loader (the trainer example
of deploy/k8s/examples/trainer). DSCACHE_SERVERS: the client Service, e.g.
dns:dscached.dscache.svc.cluster.local:7070 (ready servers only; the loader adopts the servers'
member list). Each process of an indexed Job reads its own part: rank = JOB_COMPLETION_INDEX."""
import os

import dscache
import torch


def main():
    rank = int(os.environ.get("JOB_COMPLETION_INDEX", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    steps = int(os.environ.get("STEPS", "1000"))
    loader = dscache.Loader(servers=os.environ["DSCACHE_SERVERS"],
                            dataset=os.environ.get("DSCACHE_DATASET", "train"),
                            batch_size=int(os.environ.get("BATCH_SIZE", "32")), seed=0,
                            rank=rank, world_size=world, output="torch", drop_last=True)
    model = None
    opt = None
    step = 0
    epoch = 0
    while step < steps:
        loader.set_epoch(epoch)
        for batch in loader:
            x = batch["tokens"][:, :-1].float()
            y = batch["tokens"][:, 1:].float()
            if model is None:
                model = torch.nn.Linear(x.shape[1], y.shape[1])
                opt = torch.optim.SGD(model.parameters(), lr=1e-6)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 100 == 0:
                print("rank %d step %d loss %.4f stall %.1f%%" %
                      (rank, step, loss.item(), 100.0 * loader.stats()["stall_fraction"]),
                      flush=True)
            if step >= steps:
                break
        epoch += 1
    loader.close()


if __name__ == "__main__":
    main()
