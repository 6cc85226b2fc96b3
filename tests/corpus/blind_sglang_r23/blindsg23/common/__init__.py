"""blindsg23.common"""
