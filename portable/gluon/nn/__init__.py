"""Gluon layers (MXNet 1.x ``gluon.nn``)."""
from portable.gluon.block import Block, HybridBlock
from portable.gluon.nn.basic_layers import (Activation, BatchNorm, Dense, Dropout, Embedding,
                                            Flatten, HybridLambda, HybridSequential, Lambda,
                                            LayerNorm, Sequential)
from portable.gluon.nn.conv_layers import (AvgPool1D, AvgPool2D, AvgPool3D, Conv1D,
                                           Conv1DTranspose, Conv2D, Conv2DTranspose, Conv3D,
                                           Conv3DTranspose, GlobalAvgPool1D, GlobalAvgPool2D,
                                           GlobalAvgPool3D, GlobalMaxPool1D, GlobalMaxPool2D,
                                           GlobalMaxPool3D, MaxPool1D, MaxPool2D, MaxPool3D)
from portable.gluon.symbol_block import SymbolBlock

__all__ = ["Activation", "AvgPool1D", "AvgPool2D", "AvgPool3D", "BatchNorm", "Block", "Conv1D",
           "Conv1DTranspose", "Conv2D", "Conv2DTranspose", "Conv3D", "Conv3DTranspose", "Dense",
           "Dropout", "Embedding", "Flatten", "GlobalAvgPool1D", "GlobalAvgPool2D",
           "GlobalAvgPool3D", "GlobalMaxPool1D", "GlobalMaxPool2D", "GlobalMaxPool3D",
           "HybridBlock", "HybridLambda", "HybridSequential", "Lambda", "LayerNorm", "MaxPool1D",
           "MaxPool2D", "MaxPool3D", "Sequential", "SymbolBlock"]
