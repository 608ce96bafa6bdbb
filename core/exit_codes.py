"""What train.py's exit code means: the table the launcher reads.

| code | meaning | the launcher |
|---|---|---|
| 0 | the run reached its quality target | a scored run |
| 1 | the run used its budget without reaching the target | a scored run (MLPerf counts it as a failed run) |
| 2 | bad input or configuration, named in one `error:` line; nothing trained | not retried; fix and relaunch |
| 3 | crash: an error the suite did not expect (traceback printed) | not scored; not retried unless the TPU was lost |
| 4 | the TPU is not reachable or did not initialise (one `error:` line) | the node's state decides: recreated if lost, else not retried |
| 69 | a peer was lost: a worker stopped sending heartbeats (one `error:` line naming it) | rerun, as a preemption |
| 74 | storage stayed unreachable past the outage budget (core/storage.py; one `error:` line naming the operation and the last durable checkpoint) | rerun, as a preemption |
| 75 | preempted (SIGTERM/SIGINT), saved at a loop end | rerun (timed: from scratch; untimed: resumed) |
| 128+N | killed by signal N (a second signal, or the grace period over) | as a lost node if the node is gone, else a crash |

Kept free of TensorFlow imports: the launcher reads it.
"""

TARGET_REACHED = 0
BUDGET_USED = 1
USER_ERROR = 2
CRASH = 3
NO_TPU = 4
PEER_LOST = 69  # EX_UNAVAILABLE (training/faults.py).
STORAGE_UNAVAILABLE = 74  # EX_IOERR (training/faults.py).
PREEMPTED = 75  # EX_TEMPFAIL: try again (resume from model_dir).
# Infrastructure, not the run: the launcher reruns these as it reruns a
# preemption.
RERUN = (PREEMPTED, PEER_LOST, STORAGE_UNAVAILABLE)

# A run whose log is an MLPerf result (successful or not).
SCORED = (TARGET_REACHED, BUDGET_USED)
