"""Pure, versioned Arrow transforms. No Dagster import here: stages run inside Ray workers."""
