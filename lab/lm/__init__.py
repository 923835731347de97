"""Language modelling on text: perplexity by evaluation length and position, passkey retrieval,
extend then fine-tune, and their reports."""
