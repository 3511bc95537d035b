#!/bin/bash
# Replay a schedule on 2 machines x 4 processes = 8 ranks, started the way torchrun starts them: every
# process gets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, and rank 0 (on node 0) listens
# on MASTER_ADDR:MASTER_PORT for the others (a TCP rendezvous that checks the token, the world size, that no
# rank comes twice, and that every rank replays the same schedule with the same model and settings).
#
# torchrun itself would work (`torchrun --nnodes 2 --nproc-per-node 4 --node-rank N --master-addr HOST
# --master-port 29500 --no-python trainsim replay ...`), but trainsim needs no Python: this script sets the
# same variables for the processes of one machine. Make the job's token once, a fresh random secret that only
# you can read (here on a file system both machines share), then run the script on each machine with that
# machine's index and the same token:
#
#   (umask 077; openssl rand -hex 16 > ~/.trainsim-token)
#   export TRAINSIM_TOKEN=$(cat ~/.trainsim-token)      # on every machine, before the script
#   NODE_RANK=0 MASTER_ADDR=node0.cluster examples/replay-torchrun-multinode.sh
#   NODE_RANK=1 MASTER_ADDR=node0.cluster examples/replay-torchrun-multinode.sh
#
# The token goes in the environment, never on a command line (which every user of the machine can read). The
# ranks prove to each other that they hold it without sending it; without one (or with fewer than 16
# characters) a replay of several processes refuses to start. Nothing else is encrypted: use a private network.
#
# MASTER_ADDR must be an address of node 0 that node 1 can reach (rank 0 listens on exactly that address).
# On one machine, `trainsim launch --nproc 4 -- trainsim replay FILE ...` does all this for you.
#
# The backend is `cpu` today: the CUDA backend is not there yet; it will run the same way, one process per
# GPU (LOCAL_RANK picks it), with `--backend cuda`.
set -euo pipefail

NNODES=${NNODES:-2}
NPROC_PER_NODE=${NPROC_PER_NODE:-4}
NODE_RANK=${NODE_RANK:?set NODE_RANK to the index of this machine, 0 .. NNODES-1}
export MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to node 0 address}
export MASTER_PORT=${MASTER_PORT:-29500}
export TRAINSIM_TOKEN=${TRAINSIM_TOKEN:?set TRAINSIM_TOKEN to the same secret on every machine (see above: openssl rand -hex 16)}
export WORLD_SIZE=$((NNODES * NPROC_PER_NODE))

# Every machine writes the same schedule: generation is deterministic, so the hashes agree.
trainsim gen pp-fsdp --stages 4 --dp 2 --microbatches 4 -o pp-fsdp.sched

pids=()
for ((local = 0; local < NPROC_PER_NODE; local++)); do
  RANK=$((NODE_RANK * NPROC_PER_NODE + local)) LOCAL_RANK=$local \
    trainsim replay pp-fsdp.sched --backend cpu --model small --blocks 8 --steps 20 --rendezvous-timeout 300 &
  pids+=($!)
done
# A rank that fails ends the others with an error naming it (a dead process within a second, through its
# closed connection; a hung one after 60 s without heartbeats), so waiting for all of them is enough.
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit $status
