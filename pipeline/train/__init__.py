"""CLIP finetuning and evaluation on the released tables (torch + open_clip, the `train` extra); no Beam."""
