PIPELINES_BROKER__URL=memory:// PIPELINES_STORE__URL=memory:// python shop.py
