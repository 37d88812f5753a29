# The tf-cpu image: TensorFlow for CPUs, every Python package pinned by hash.
# Rendered by launcher/images.py (launch-base:bookworm: the pinned or local base image) and
# built by launcher/imagebuild.py from a context holding only: this file,
# lockfile.txt, tools.txt (the lockfile's pins of pip/setuptools/wheel), the
# launcher package and wheels/ (the locked files, downloaded and hash-checked on
# the host). The build runs with no network.

# ---- builder: install the locked wheels into /opt/launch
FROM launch-base:bookworm AS builder
LABEL launch.stage=builder
# No timestamped .pyc (PYTHONDONTWRITEBYTECODE, --no-compile); a fixed hash seed and
# SOURCE_DATE_EPOCH for whatever a build backend writes.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 SOURCE_DATE_EPOCH=0 \
    PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY wheels/ /build/wheels/
COPY lockfile.txt tools.txt /build/
RUN python3 -m venv --without-pip /opt/launch/venv \
 && set -- /build/wheels/pip-*.whl \
 && /opt/launch/venv/bin/python "$1/pip" install --no-index \
      --find-links /build/wheels --require-hashes --no-deps --no-compile -r /build/tools.txt \
 && /opt/launch/venv/bin/python -m pip install --no-index --find-links /build/wheels \
      --require-hashes --no-deps --no-compile --no-build-isolation -r /build/lockfile.txt
# Byte code with hash-based invalidation (PEP 552): no timestamps, same bytes every build.
RUN /opt/launch/venv/bin/python -m compileall -q -j 1 --invalidation-mode unchecked-hash \
      /opt/launch/venv/lib

# ---- final: the base and /opt/launch; no wheels, no build files, no CA bundle
FROM launch-base:bookworm
COPY --from=builder /opt/launch/venv /opt/launch/venv
RUN groupadd --gid 1000 launch \
 && useradd --no-log-init --uid 1000 --gid 1000 --create-home --home-dir /home/launch \
      --shell /usr/sbin/nologin launch
ENV PATH=/opt/launch/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONPATH=/opt/launch/src PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/home/launch
# The launcher last: a change to it rebuilds only these two layers.
COPY launcher/ /opt/launch/src/launcher/
RUN PYTHONHASHSEED=0 /opt/launch/venv/bin/python -m compileall -q -j 1 \
      --invalidation-mode unchecked-hash /opt/launch/src
USER 1000:1000
WORKDIR /home/launch
# The determinism bootstrap is the entrypoint: `docker run IMAGE RUN_DIR`.
ENTRYPOINT ["/opt/launch/venv/bin/python", "-P", "-m", "launcher.bootstrap"]
