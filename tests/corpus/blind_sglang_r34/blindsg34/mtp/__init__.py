"""DeepSeek-style MTP / NextN drafting on SGLang spec-v2 workers with DP attention."""
