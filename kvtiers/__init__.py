"""kvtiers: tiered KV-cache LLM serving on SageMaker HyperPod (EKS), as CDK constructs and a CDK app."""
