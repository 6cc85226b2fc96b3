"""blindsg23.attn"""
