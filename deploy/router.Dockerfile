# vllm-router, the version tqserve's KV events are tested against (tests/python/test_kv_events.py):
# `docker build -f deploy/router.Dockerfile -t vllm-router:0.1.17 deploy`.
FROM python:3.11-slim-bookworm
RUN pip install --no-cache-dir vllm-router==0.1.17 && useradd --uid 10002 --no-create-home router
USER 10002
EXPOSE 8000 29000
ENTRYPOINT ["vllm-router"]
