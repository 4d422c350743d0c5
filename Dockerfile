FROM python:3.11-slim
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends libsndfile1 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md alembic.ini ./
COPY server server
COPY clients clients
COPY model_bridges model_bridges
COPY migrations migrations
COPY static static
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir -e '.[tts]'
EXPOSE 8600
CMD ["mpe", "serve", "--host", "0.0.0.0"]
