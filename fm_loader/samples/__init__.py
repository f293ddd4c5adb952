"""What a sample is: a set's stored samples turned into training arrays and batches."""
