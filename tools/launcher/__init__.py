"""The launcher's internals (tools/launch.py is the command): the job plan,
its execution against Google Cloud, gcloud and GKE, the job runner on a
TPU VM, the storage preflight."""
