"""Sources of memories: markdown memory workspaces and conversation transcripts."""
