"""flagos: one PyTorch device for any AI accelerator."""
