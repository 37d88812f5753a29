"""The Docker runtime: pinned images, built offline from hash-locked lockfiles, and job containers.

Owns image specs and Dockerfile rendering (``images``, pure), container arguments
(``container_spec``, pure), every call to the Docker daemon (``containers``, the
only module that imports the Docker SDK), making or reusing an image
(``imagebuild``), running a job in a container of its run's image (``runtime``), the
local base image and ``launch image lock`` (``baseimage``), the GPU capability of a daemon
(``gpus``), and the installed-tree hash computed inside images (``treehash``).

May import ``launcher.record`` (run directories, the environment allowlist),
``launcher.errors`` and ``launcher.proc``; never ``run``, ``verdict``, ``sweep`` or
``cli`` (a job reaches it through ``launcher.run.runtime``).
"""
