"""The local physical limit: the raw GetMessages + Delete loop on the app's own messages, and paired rounds."""
