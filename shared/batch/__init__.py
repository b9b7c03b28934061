"""What a batch is made of, as data (pure): its manifest and admission rule (`batches`), chunking, the chunk
message envelope and its claim check, per-item settlement and results, parked (poison) chunks.
"""
