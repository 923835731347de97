"""Language modelling on text: perplexity by length, passkey retrieval, extend then fine-tune."""
