"""Language modelling on text: perplexity by evaluation length and position, and reports."""
