"""Programs that check, on the real CUDA stack, that the tracer does no harm (issue 16).

Modes (argv[1]); each prints a transcript that must be the same with and without the tracer:
  loader    trains a small model on the GPU for 20 steps with a DataLoader of 2 forked workers (the
            workers make no GPU call: they must leave no trace)
  spawn     3 spawn workers, each allocating 64 MiB on the GPU 20 times and keeping 16 MiB, and the
            parent allocating too: one whole trace per process
  sigint    SIGINT to itself at step 5: KeyboardInterrupt is raised and caught, training goes on
  exitbusy  a thread allocates and frees GPU memory without end; the main thread prints
            "exiting" and leaves (the runner times the exit)
  secret    ignores its --hf-token/--api-key options: the trace must hold them redacted
"""
import os
import signal
import sys
import threading
import time

import torch

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def train(steps, on_step=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    model.to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(640, 256), torch.randint(0, 10, (640,)))
    workers = 2 if sys.argv[1] == "loader" else 0
    loader = torch.utils.data.DataLoader(data, batch_size=32, num_workers=workers)
    step = 0
    while step < steps:
        for x, y in loader:
            step += 1
            loss = torch.nn.functional.cross_entropy(model(x.to(DEV)), y.to(DEV))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if on_step:
                on_step(step)
            if step == steps:
                break
    print(f"trained {steps} steps")


def spawned(i):
    keep = []
    for _ in range(20):
        x = torch.empty(64 << 20, dtype=torch.uint8, device=DEV)
        del x
    keep.append(torch.empty(16 << 20, dtype=torch.uint8, device=DEV))
    torch.cuda.synchronize() if DEV == "cuda" else None


def main():
    mode = sys.argv[1]
    if mode == "loader":
        train(20)
    elif mode == "spawn":
        import multiprocessing as mp

        parent = torch.empty(8 << 20, dtype=torch.uint8, device=DEV)
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=spawned, args=(i,)) for i in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        print("workers", [p.exitcode for p in procs])
        del parent
    elif mode == "sigint":
        def at(step):
            if step == 5:
                try:
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(2)
                    print("not interrupted")
                except KeyboardInterrupt:
                    print("KeyboardInterrupt at step 5")

        print(signal.getsignal(signal.SIGINT))
        train(10, at)
    elif mode == "exitbusy":
        def busy():
            while True:
                x = torch.empty(1 << 20, dtype=torch.uint8, device=DEV)
                del x

        threading.Thread(target=busy, daemon=True).start()
        time.sleep(2)
        print("exiting", flush=True)
    elif mode == "secret":
        train(2)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
