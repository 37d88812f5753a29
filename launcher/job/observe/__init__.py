"""What the job used, observed without the job's help: the files it read (an audit hook, the
readers of TensorFlow and h5py, the OS-level watch), the environment variables its own code
read, the modules it imported, the seeds it set.

``observers`` installs them in their one order and gathers their facts for the fingerprint.
"""
