"""The delivery engine: campaign executions resolved, held out, rendered and dispatched."""
