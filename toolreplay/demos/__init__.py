"""The built-in demonstrations (`toolreplay demo NAME`)."""
